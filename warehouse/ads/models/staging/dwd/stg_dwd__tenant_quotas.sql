with

source as (

    select * from {{ lake_source('dwd', 'tenant_quota') }}

),

renamed as (

    select

        ----------  ids
        tenant_id,

        ----------  numerics
        daily_request_quota,
        daily_token_quota,

        ----------  timestamps
        effective_from

    from source

)

select * from renamed
