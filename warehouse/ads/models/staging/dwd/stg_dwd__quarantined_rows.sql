with

source as (

    select * from {{ lake_source('dwd', 'quarantine') }}

),

renamed as (

    -- Rule ids only: the raw lines (personal data) stay in the quarantine.
    select

        ----------  strings
        target_table,
        rules,

        ----------  timestamps
        quarantined_at,
        event_date

    from source

)

select * from renamed
